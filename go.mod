module github.com/queuey/terraform-provider-queuey

go 1.26.8

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/terraform-plugin-framework v1.19.0 // indirect
	github.com/hashicorp/terraform-plugin-framework-validators v0.19.0 // indirect
	github.com/hashicorp/terraform-plugin-testing v1.16.0 // indirect
	github.com/michaelklishin/rabbit-hole/v2 v2.12.0 // indirect
	github.com/rabbitmq/amqp091-go v1.17.0 // indirect
)
